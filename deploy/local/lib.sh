# shellcheck shell=bash
# Helpers shared by deploy/local/stack.sh and deploy/local/connect.sh, which
# source this file; it is not a command of its own. One copy, so the two
# scripts cannot drift apart in how they find, signal and wait for their
# servers.
#
# The sourcing script provides log and die (so every line carries its own
# prefix, [stack] or [connect]) and sets PIDS (the directory of the pid files)
# and STOP_WAIT (seconds) before it sources this file; LOGS (the log
# directory) and JAVA (the java binary) before it calls start_java.
: "${PIDS:?set PIDS before sourcing lib.sh}" "${STOP_WAIT:?set STOP_WAIT before sourcing lib.sh}"

# running PID: the process exists and is not a zombie (an orphaned server that
# exited stays a zombie until its new parent reaps it, and kill -0 still works).
running() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# pid_alive NAME PATTERN: true when $PIDS/NAME.pid names a live process whose
# command line still contains PATTERN (a pid file that survived a reboot may
# name another process by now).
pid_alive() {
	local f=$PIDS/$1.pid pid
	[[ -s $f ]] || return 1
	pid=$(<"$f")
	running "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

# stop_pid NAME PATTERN SIGNAL LABEL: stop the process of $PIDS/NAME.pid:
# SIGNAL, wait up to STOP_WAIT seconds, then SIGKILL (and wait up to 10s
# more). Only ever signals the pid we recorded, and only while pid_alive
# vouches for it. The pid file is removed in every case. Progress lines start
# with LABEL (may be empty). Sets REPLY to the seconds from the signal to the
# end, or to "" when nothing was running, so that each script words its own
# last line.
stop_pid() {
	local name=$1 pattern=$2 sig=$3 label=$4 pid
	REPLY=
	if ! pid_alive "$name" "$pattern"; then
		rm -f "$PIDS/$name.pid"
		return 0
	fi
	pid=$(<"$PIDS/$name.pid")
	log "${label}stopping (pid $pid, SIG$sig) ..."
	kill -s "$sig" "$pid" 2>/dev/null || true
	local t0=$SECONDS start=$SECONDS
	while ((SECONDS - start < STOP_WAIT)) && running "$pid"; do
		sleep 0.2
	done
	if running "$pid"; then
		log "${label}still running after ${STOP_WAIT}s, sending SIGKILL"
		kill -s KILL "$pid" 2>/dev/null || true
		start=$SECONDS
		while ((SECONDS - start < 10)) && running "$pid"; do sleep 0.2; done
	fi
	rm -f "$PIDS/$name.pid"
	REPLY=$((SECONDS - t0))
}

# port_busy PORT: something accepts connections on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# port_taken PORT: a TCP socket listens on PORT (on any address). Sockets in
# TIME_WAIT do not count: stack.sh's servers bind with SO_REUSEADDR.
port_taken() { ss -Htln "sport = :$1" 2>/dev/null | grep -q . || port_busy "$1"; }

# port_bound PORT: any TCP socket has PORT as its local port, whatever its
# state (listening, connected, TIME_WAIT). The stricter test, which connect.sh
# uses for the worker's REST port.
port_bound() { ss -Htan "sport = :$1" 2>/dev/null | grep -q . || port_busy "$1"; }

# free_port START PROBE: sets REPLY to the first port >= START for which
# PROBE PORT (port_taken or port_bound) fails and that no earlier call in this
# process took: the servers start only after all their ports are picked, so
# until then the probe cannot see the ports already handed out. A fixed
# starting point keeps the ports easy to recognise while tolerating other
# stacks.
PICKED=" "
free_port() {
	local p=$1 probe=$2
	while ((p < $1 + 500)); do
		if [[ $PICKED != *" $p "* ]] && ! "$probe" "$p"; then
			PICKED+="$p "
			REPLY=$p
			return
		fi
		p=$((p + 1))
	done
	die "no free port in $1..$p"
}

# start_java NAME HEAP LOG4J CLASSPATH MAIN ARG [JVM_FLAG...]: start one of
# the stack's JVM servers (Kafka, the Kafka Connect worker) in the background
# and record its pid in $PIDS/NAME.pid; its stdout and stderr go to
# $LOGS/NAME.stdout.log. setsid: the server outlives this shell and ignores
# signals sent to its process group (Ctrl-C, a killed job). 8>&- 9>&-: it
# must not inherit the lock of connect.sh (8) nor stack.sh's (9), or it would
# hold them for as long as it runs.
start_java() {
	local name=$1 heap=$2 log4j=$3 cp=$4 main=$5 arg=$6
	shift 6
	# shellcheck disable=SC2086 # heap holds several JVM flags
	setsid "$JAVA" $heap -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$log4j" "$@" -cp "$cp" "$main" "$arg" \
		</dev/null >>"$LOGS/$name.stdout.log" 2>&1 8>&- 9>&- &
	echo $! >"$PIDS/$name.pid"
}

# await_ready NAME WAIT INTERVAL LABEL READY LOG...: wait up to WAIT seconds
# for the command READY to succeed, polling every INTERVAL seconds, and die
# with the last lines of each LOG when the process of $PIDS/NAME.pid exits
# first or READY still fails at the end. The pid alone is checked, not its
# command line: until setsid has exec'd, that is still the starting shell's.
# Progress lines start with LABEL (may be empty).
await_ready() {
	local name=$1 wait=$2 interval=$3 label=$4 ready=$5 start=$SECONDS
	shift 5
	while ((SECONDS - start < wait)); do
		if ! running "$(<"$PIDS/$name.pid")"; then
			tail_logs "$@"
			die "${label}exited during start-up"
		fi
		if "$ready"; then
			log "${label}ready after $((SECONDS - start))s"
			return
		fi
		sleep "$interval"
	done
	tail_logs "$@"
	die "${label}not ready after ${wait}s"
}

# tail_logs FILE...: show why a server did not come up.
tail_logs() {
	local f
	for f in "$@"; do
		[[ -s $f ]] || continue
		log "---- last lines of $f ----"
		tail -n 40 "$f" >&2
	done
}

# take_lock FD FILE WHO: open FILE on file descriptor FD of this shell and
# lock it (flock, waiting up to 600s), so that two commands never interleave;
# the lock lasts until this shell exits. FD is fixed by the caller, not
# allocated, because every server a script starts must be started with FD
# closed (FD>&-): a server that inherited it would hold the lock for as long
# as it runs. WHO names the other holder in the error.
take_lock() {
	local fd=$1 file=$2
	[[ $fd =~ ^[3-9]$ ]] || die "take_lock: bad file descriptor $fd"
	# A redirection cannot take its fd number from a variable (the {var}>
	# form allocates a new one), hence eval, on the digit checked above.
	eval "exec $fd>\"\$file\""
	flock -w 600 "$fd" || die "another $3 holds $file"
}
