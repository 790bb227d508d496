# Sourced by scripts/test.sh: runs the suite's stages and keeps their costs.
#
#   stage NAME COMMAND...   runs COMMAND (set -e stops the script when it fails) and
#                           prints "== NAME  <wall> s, <cpu> s CPU, peak <MB> MB": its
#                           wall time, the CPU time of all its processes, and the largest
#                           resident size any one of them reached (GNU time's %M;
#                           where /usr/bin/time is missing, the wall time alone)
#   background_start NAME COMMAND...
#                           starts COMMAND in the background at the lowest CPU priority,
#                           in a process group of its own, its output kept in a log: it
#                           uses what the stages in the foreground leave of the cores.
#                           One at a time.
#   background_wait         waits for it, prints its output, and its line as a stage's
#                           (its whole wall time, and how long the script waited)
#   stage_summary           prints every stage's line again, and the total

stage_lines=()
stage_start=$SECONDS
bg_pid=""

# The GNU time format stage_line reads: user CPU, system CPU, peak resident KiB.
stage_time_format='%U %S %M'

# stage_line NAME SECONDS TIME_FILE STATUS [NOTE]: one stage's line, kept for the summary.
stage_line() {
  local line user sys rss
  line=$(printf '%-28s %5d s' "$1" "$2")
  if read -r user sys rss < <(tail -1 "$3" 2>/dev/null) && [[ "$rss" =~ ^[0-9]+$ ]]; then
    line+=$(awk -v u="$user" -v s="$sys" -v m="$rss" 'BEGIN { printf ", %6.0f s CPU, peak %6d MB", u + s, m / 1024 }')
  fi
  [ -z "${5:-}" ] || line+=" ($5)"
  [ "$4" -eq 0 ] || line+=" (failed: exit $4)"
  stage_lines+=("$line")
  echo "== $line"
}

# The command line that runs "$@" under GNU time, writing to $1.
timed() {
  local out=$1
  shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -q -f "$stage_time_format" -o "$out" "$@"
  else
    "$@"
  fi
}

stage() {
  local name=$1 t0=$SECONDS status=0 time_file
  shift
  echo "== $name"
  time_file=$(mktemp)
  timed "$time_file" "$@" || status=$?
  stage_line "$name" $((SECONDS - t0)) "$time_file" "$status"
  rm -f "$time_file"
  return "$status"
}

background_start() {
  bg_name=$1
  shift
  bg_log=$(mktemp)
  bg_time=$(mktemp)
  bg_t0=$SECONDS
  echo "== $bg_name: started in the background"
  export -f timed
  export stage_time_format
  # setsid makes a session of its own, which a kernel with autogroup scheduling gives
  # an equal share of the CPU whatever the nice value of its processes: the session's
  # own nice value is set too.
  setsid nice -n 19 bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true; timed "$@"' timed \
    "$bg_time" "$@" > "$bg_log" 2>&1 &
  bg_pid=$!
}

background_wait() {
  local t0=$SECONDS status=0
  wait "$bg_pid" || status=$?
  bg_pid=""
  cat "$bg_log"
  stage_line "$bg_name" $((SECONDS - bg_t0)) "$bg_time" "$status" "background; waited $((SECONDS - t0)) s"
  rm -f "$bg_log" "$bg_time"
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
