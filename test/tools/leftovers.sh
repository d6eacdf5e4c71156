#!/usr/bin/env bash
# leftovers.sh PIDFILE kills and names every process of PIDFILE that is still
# running, and exits 1 if there was one. Each line of PIDFILE is
# "PID STARTTIME NAME" for a process a test harness started (STARTTIME is
# field 22 of /proc/PID/stat). PIDs are reused (a test run starts tens of
# thousands of processes), so a process counts as left running only if its
# PID still has its start time.
set -euo pipefail
pidfile=$1
left=0
while read -r pid start name; do
	stat=$(cat "/proc/$pid/stat" 2>/dev/null || true)
	[[ -n $stat ]] || continue
	# "pid (comm) state ...": comm may hold spaces, so count after the last ')'.
	read -ra fields <<<"${stat##*) }" # fields 3 (state), 4, ... 22 (starttime)
	if [[ ${fields[0]} != Z && ${fields[19]} == "$start" ]]; then
		echo "leftovers.sh: $name (pid $pid) still running after the tests; killing it" >&2
		kill -9 "$pid" 2>/dev/null || true
		left=1
	fi
done <"$pidfile"
echo "leftovers.sh: $(wc -l <"$pidfile") processes started by the test harness, $( ((left)) && echo some || echo none) left running" >&2
exit "$left"
