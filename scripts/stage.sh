# Sourced by scripts/test.sh: runs the suite's stages and keeps their costs.
#
#   stage NAME COMMAND...   runs COMMAND (set -e stops the script when it fails) and
#                           prints "== NAME: <wall> s, peak <MB> MB resident", the peak
#                           being the largest resident size any one of its processes
#                           reached (GNU time's %M, where /usr/bin/time exists)
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

stage_summary() {
  echo
  echo "== stages"
  printf '%s\n' "${stage_lines[@]}"
  printf '%-28s %5d s\n' "total" $((SECONDS - stage_start))
}
