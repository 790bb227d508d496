# Sourced by scripts/test.sh: runs the suite's stages and keeps their costs.
#
#   stage NAME COMMAND...   runs COMMAND (set -e stops the script when it fails) and
#                           prints "== NAME: <wall> s, peak <MB> MB resident", the peak
#                           being the largest resident size any one of its processes
#                           reached (GNU time's %M, where /usr/bin/time exists)
#   background_start NAME COMMAND...
#                           starts COMMAND at the lowest CPU priority in the background,
#                           in a process group of its own
#                           (its output kept in a log), to use what the stages in the
#                           foreground leave of the cores; one at a time
#   background_wait         waits for it; prints its line as a stage's (its whole time,
#                           and how much of it the script waited), and its log if it failed
#   stage_summary           prints every stage's line again, and the total

stage_lines=()
stage_start=$SECONDS

stage() {
  local name=$1
  shift
  echo "== $name"
  local t0=$SECONDS rss_file status=0 peak=""
  rss_file=$(mktemp)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -q -f '%M' -o "$rss_file" "$@" || status=$?
    peak=$(tail -1 "$rss_file")
  else
    "$@" || status=$?
  fi
  rm -f "$rss_file"
  local line
  line=$(printf '%-28s %5d s' "$name" $((SECONDS - t0)))
  [[ "$peak" =~ ^[0-9]+$ ]] && line+=$(printf ', peak %6d MB resident' $((peak / 1024)))
  [ "$status" -eq 0 ] || line+=" (failed: exit $status)"
  stage_lines+=("$line")
  echo "== $line"
  return "$status"
}

bg_pid=""

background_start() {
  bg_name=$1
  shift
  bg_log=$(mktemp)
  bg_rss=$(mktemp)
  bg_t0=$SECONDS
  echo "== $bg_name: started in the background"
  if [ -x /usr/bin/time ]; then
    setsid nice -n 19 /usr/bin/time -q -f '%M' -o "$bg_rss" "$@" > "$bg_log" 2>&1 &
  else
    setsid nice -n 19 "$@" > "$bg_log" 2>&1 &
  fi
  bg_pid=$!
}

background_wait() {
  local t0=$SECONDS status=0 peak line
  wait "$bg_pid" || status=$?
  bg_pid=""
  peak=$(tail -1 "$bg_rss" 2>/dev/null || true)
  line=$(printf '%-28s %5d s' "$bg_name" $((SECONDS - bg_t0)))
  [[ "$peak" =~ ^[0-9]+$ ]] && line+=$(printf ', peak %6d MB resident' $((peak / 1024)))
  line+=" (background; waited $((SECONDS - t0)) s)"
  [ "$status" -eq 0 ] || { cat "$bg_log"; line+=" (failed: exit $status)"; }
  rm -f "$bg_log" "$bg_rss"
  stage_lines+=("$line")
  echo "== $line"
  return "$status"
}

stage_summary() {
  trap - EXIT
  # A job still in the background (the script failed first) goes with everything it started.
  if [ -n "$bg_pid" ]; then kill -- "-$bg_pid" 2>/dev/null || kill "$bg_pid" 2>/dev/null || true; fi
  echo
  echo "== stages"
  printf '%s\n' "${stage_lines[@]}"
  printf '%-28s %5d s\n' "total" $((SECONDS - stage_start))
}
