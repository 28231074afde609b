#!/usr/bin/env bash
# bounded SECONDS CMD...: runs CMD in a process group of its own and, if it outlives SECONDS, stops everything it
# started: a TERM to its group and to every process below it, then, after BOUNDED_GRACE_S (default 5) or as soon as
# all are gone, a KILL to whatever is left. Returns CMD's status (non-zero when stopped: 143 for a command that ends on
# the TERM, 137 on the KILL). Sourced by tools/device_call.sh (a driver's steps) and tools/gpu_run.sh (its steps); call
# it from a script, not an interactive shell (there a background job already leads its own group, and setsid would
# fork away from $!).
# Why a group, a tree and a TERM first:
# - `timeout` signals only its child: a timed-out tools/gpu_run.sh left torchrun running, holding port 29500, and
#   every later step of that call failed (session 26, call 1).
# - torchrun starts each rank in a session of its own (start_new_session), so a KILL to torchrun's group leaves the
#   ranks running, holding their GPUs: a TERM lets torchrun stop its ranks, and the KILL then goes to the ranks too,
#   found below CMD before the TERM.
# - A TERM or INT to the script while CMD runs stops CMD the same way (CMD is in a session of its own, so a Ctrl-C in
#   the terminal no longer reaches it) and ends the script with 143 / 130. That is also how bounded steps nest: a
#   driver's bounded gpu_run.sh gets the TERM, and its own bounded step stops its torchrun before the KILL comes.

# The processes below PID, children first, each on a line (they may be in other groups and sessions).
_bounded_tree() {
  local child
  for child in $(pgrep -P "$1" 2> /dev/null); do
    echo "$child"
    _bounded_tree "$child"
  done
}

# Stops group PID and the processes below its leader: a TERM, then a KILL to whatever is left after the grace.
_bounded_stop() {
  local group=$1 below tries=$((${BOUNDED_GRACE_S:-5} * 10)) pid alive
  below=$(_bounded_tree "$group")
  # shellcheck disable=SC2086  # below is a list of pids
  kill -TERM -- -"$group" $below 2> /dev/null
  while [ $tries -gt 0 ]; do
    alive=0
    kill -0 -- -"$group" 2> /dev/null && alive=1
    for pid in $below; do kill -0 "$pid" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
    tries=$((tries - 1))
  done
  # shellcheck disable=SC2086
  kill -9 -- -"$group" $below 2> /dev/null
  return 0
}

# The script got INT or TERM while CMD (group PID, its bound's watcher WATCHER) ran: the watcher's sleep ends (it then
# stops nothing), CMD is stopped, and the script ends with STATUS.
_bounded_interrupted() {
  pkill -9 -P "$2" sleep 2> /dev/null
  _bounded_stop "$1"
  exit "$3"
}

bounded() {
  local seconds=$1 pid watcher rc
  shift
  setsid "$@" &
  pid=$!
  (sleep "$seconds" && _bounded_stop "$pid") 2> /dev/null &
  watcher=$!
  # shellcheck disable=SC2064  # the pids are meant to be expanded now
  trap "_bounded_interrupted $pid $watcher 130" INT
  # shellcheck disable=SC2064
  trap "_bounded_interrupted $pid $watcher 143" TERM
  wait "$pid"
  rc=$?
  trap - INT TERM
  # A watcher still in its first sleep ends without stopping anything; one that is stopping CMD (which ended on the
  # TERM) goes on until the rest is gone, at most the grace.
  pkill -9 -P "$watcher" sleep 2> /dev/null
  wait "$watcher" 2> /dev/null
  return $rc
}
