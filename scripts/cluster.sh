#!/usr/bin/env bash
# A local three-node RabbitMQ cluster for queuey's tests and for anyone who
# wants to try queuey against quorum queues. It runs beside a broker that
# may already listen on 5672: its nodes have their own names, ports, data
# and Erlang cookie, so nothing can join them to that broker by mistake.
#
# Usage:
#   scripts/cluster.sh start               start the missing nodes, cluster them,
#                                          print the QUEUEY_CLUSTER=... line
#   scripts/cluster.sh stop [--clean]      stop every node (--clean also deletes
#                                          the cluster's directory)
#   scripts/cluster.sh urls                print the QUEUEY_CLUSTER=... line only
#   scripts/cluster.sh status              the cluster's cluster_status
#   scripts/cluster.sh kill N              kill -9 node N (1..3), for fault tests
#   scripts/cluster.sh start-node N        start node N again and wait for it
#   scripts/cluster.sh node-of-leader Q [VHOST]
#                                          print N of the node leading quorum queue Q
#
# Settings, from the environment:
#   QUEUEY_CLUSTER_DIR      where the nodes keep config, data and logs
#   QUEUEY_CLUSTER_PORTS    the three AMQP ports; each node's Erlang
#                           distribution port is its AMQP port + 20000
#   QUEUEY_CLUSTER_TIMEOUT  seconds to wait for a node to boot
#   QUEUEY_CLUSTER_USER     the user the nodes run as when we are root
#   QUEUEY_RABBITMQ_BIN     directory of the real rabbitmq-server and
#                           rabbitmqctl scripts (found from PATH otherwise)
#
# Node N is called queueyN@localhost. Everything listens on 127.0.0.1 only,
# and guest/guest may log in because guest is allowed from loopback.
set -euo pipefail

CLUSTER_DIR=${QUEUEY_CLUSTER_DIR:-/tmp/queuey-cluster}
read -r -a PORTS <<<"${QUEUEY_CLUSTER_PORTS:-5701 5702 5703}"
BOOT_TIMEOUT=${QUEUEY_CLUSTER_TIMEOUT:-120}
RUN_USER=${QUEUEY_CLUSTER_USER:-rabbitmq}
NODES=(1 2 3)
DIST_OFFSET=20000
MARKER=.queuey-cluster
COOKIE_HOME=$CLUSTER_DIR/home

# Any RabbitMQ setting inherited from the caller could point a node at the
# other broker's files; the script sets every one the nodes need itself.
unset_rabbitmq_env() {
	local name
	for name in $(compgen -v RABBITMQ_ || true); do
		unset "$name"
	done
}

log() { echo "cluster: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# Packaged installs often put wrappers on PATH that switch to the system
# broker's home (and so to its cookie) and send the server's output to
# that broker's log. The real scripts live in the directory the wrapper
# links to, so follow the link and call them directly.
find_rabbitmq_bin() {
	local dir=${QUEUEY_RABBITMQ_BIN:-}
	if [[ -z $dir ]]; then
		local server
		server=$(command -v rabbitmq-server) || die "rabbitmq-server is not on PATH"
		dir=$(dirname "$(readlink -f "$server")")
	fi
	[[ -x $dir/rabbitmq-server && -e $dir/rabbitmq-env ]] ||
		die "no real rabbitmq-server script in $dir (set QUEUEY_RABBITMQ_BIN)"
	RMQ_BIN=$dir
}

node_name() { echo "queuey$1@localhost"; }
amqp_port() { echo "${PORTS[$1 - 1]}"; }
dist_port() { echo $(($(amqp_port "$1") + DIST_OFFSET)); }
node_dir() { echo "$CLUSTER_DIR/node$1"; }
pid_file() { echo "$(node_dir "$1")/rabbitmq.pid"; }

check_ports() {
	local p
	((${#PORTS[@]} == ${#NODES[@]})) || die "QUEUEY_CLUSTER_PORTS needs ${#NODES[@]} ports"
	for p in "${PORTS[@]}"; do
		if ! [[ $p =~ ^[0-9]+$ ]] || ((p == 0 || p + DIST_OFFSET > 65535)); then
			die "bad port '$p' in QUEUEY_CLUSTER_PORTS"
		fi
	done
}

check_node_arg() {
	[[ ${1:-} =~ ^[1-3]$ ]] || die "expected a node number 1..3, got '${1:-}'"
}

# Runs a command as the nodes' user: as ourselves unless we are root.
as_node_user() {
	if [[ $EUID -eq 0 ]]; then
		runuser -u "$RUN_USER" -- "$@"
	else
		"$@"
	fi
}

# The environment every server and CLI call shares: the cluster's own HOME
# (so its own cookie), its own empty environment file in place of the
# system broker's, and Erlang distribution on loopback only.
common_env() {
	echo "HOME=$COOKIE_HOME"
	echo "RABBITMQ_CONF_ENV_FILE=$CLUSTER_DIR/rabbitmq-env.conf"
	echo "ERL_EPMD_ADDRESS=127.0.0.1"
	echo "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}"
}

# rabbitmqctl (or another CLI tool given by -T TOOL) against node N.
ctl() {
	local tool=rabbitmqctl
	if [[ $1 == -T ]]; then
		tool=$2
		shift 2
	fi
	local n=$1
	shift
	local env_lines
	mapfile -t env_lines < <(common_env)
	(cd "$CLUSTER_DIR" && as_node_user env "${env_lines[@]}" \
		"$RMQ_BIN/$tool" -n "$(node_name "$n")" "$@")
}

# The pid of node N's Erlang VM, if it is alive. The pid file alone is not
# trusted: the process must be a beam.smp whose environment names this
# node, which no other broker's VM has.
node_pid() {
	local n=$1 pid
	pid=$(cat "$(pid_file "$n")" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == beam.smp ]] || return 1
	{ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null |
		grep -qx "RABBITMQ_NODENAME=$(node_name "$n")" || return 1
	echo "$pid"
}

is_alive() { node_pid "$1" >/dev/null; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The directory is ours if it holds our marker; a new or empty one
# becomes ours. Anything else is refused, since stop --clean deletes it.
claim_dir() {
	if [[ -e $CLUSTER_DIR && ! -e $CLUSTER_DIR/$MARKER ]] &&
		[[ -n $(ls -A "$CLUSTER_DIR" 2>/dev/null) ]]; then
		die "$CLUSTER_DIR exists and is not a queuey cluster directory"
	fi
	mkdir -p "$CLUSTER_DIR"
	touch "$CLUSTER_DIR/$MARKER"
}

# A random cookie, created once, readable by the nodes' user only.
make_cookie() {
	local cookie=$COOKIE_HOME/.erlang.cookie
	mkdir -p "$COOKIE_HOME"
	[[ -s $cookie ]] && return 0
	(
		umask 077
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$cookie"
	)
	chmod 400 "$cookie"
}

# How long, in ms, a quorum queue's at-least-once dead-letter worker waits
# before it publishes again what a target queue refused. RabbitMQ's default
# is 180000. A delay level whose message is refused by a lane or work queue
# that is electing a leader (its node was just killed) holds that message,
# and the 31 behind it, until then: deferrals come back minutes late.
# A refusal is final, so publishing again sooner adds no duplicate.
DLX_RETRY_MS=5000

# Config for node N: its own listener, no plugins (so no management
# port), a low free-disk limit so that a small disk raises no alarm, and
# the dead-letter worker's retry (DLX_RETRY_MS), which only the advanced
# config file can set.
write_node_config() {
	local n=$1 dir
	dir=$(node_dir "$n")
	mkdir -p "$dir/mnesia" "$dir/log"
	cat >"$dir/rabbitmq.conf" <<-EOF
		cluster_name = queuey
		listeners.tcp.local = 127.0.0.1:$(amqp_port "$n")
		loopback_users.guest = true
		disk_free_limit.absolute = 50MB
	EOF
	echo "[]." >"$dir/enabled_plugins"
	echo "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, $DLX_RETRY_MS}]}]." >"$dir/advanced.config"
}

# Whether node N runs with this script's dead-letter worker retry.
dlx_retry_ok() {
	[[ $(ctl "$1" -q eval 'application:get_env(rabbit, dead_letter_worker_publisher_confirm_timeout).') == "{ok,$DLX_RETRY_MS}" ]]
}

# Nodes left running by an older version of this script may lack its
# settings: the cluster is stopped, to start again with them.
stop_stale_nodes() {
	local n
	for n in "${NODES[@]}"; do
		is_alive "$n" || continue
		dlx_retry_ok "$n" && continue
		log "$(node_name "$n") runs without this script's settings; restarting the cluster"
		cmd_stop
		return 0
	done
}

prepare_dirs() {
	claim_dir
	make_cookie
	echo "# every setting comes from scripts/cluster.sh" >"$CLUSTER_DIR/rabbitmq-env.conf"
	local n
	for n in "${NODES[@]}"; do
		write_node_config "$n"
	done
	if [[ $EUID -eq 0 ]]; then
		chown -R "$RUN_USER:" "$CLUSTER_DIR"
	fi
}

# Starts node N's VM in the background; wait_node waits for it to boot.
launch_node() {
	local n=$1 dir port p env_lines
	dir=$(node_dir "$n")
	port=$(amqp_port "$n")
	for p in "$port" "$(dist_port "$n")"; do
		port_in_use "$p" && die "port $p is taken; node $n cannot start"
	done
	rm -f "$(pid_file "$n")"
	mapfile -t env_lines < <(common_env)
	log "starting $(node_name "$n") on 127.0.0.1:$port"
	(cd "$CLUSTER_DIR" && as_node_user env "${env_lines[@]}" \
		RABBITMQ_NODENAME="$(node_name "$n")" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="$port" \
		RABBITMQ_DIST_PORT="$(dist_port "$n")" \
		RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
		RABBITMQ_MNESIA_BASE="$dir/mnesia" \
		RABBITMQ_LOG_BASE="$dir/log" \
		RABBITMQ_PID_FILE="$(pid_file "$n")" \
		"$RMQ_BIN/rabbitmq-server" -detached) >&2
}

# Waits until node N's broker application is running.
wait_node() {
	local n=$1
	if ! ctl "$n" -q wait --timeout "$BOOT_TIMEOUT" "$(pid_file "$n")" >&2; then
		die "$(node_name "$n") did not start; see $(node_dir "$n")/log"
	fi
}

# Node 1's running nodes, one per line, picked out of the JSON status
# with grep so that no JSON tool is needed.
running_nodes() {
	ctl 1 -q cluster_status --formatter json |
		grep -o '"running_nodes":\[[^]]*\]' | grep -o '"[^"]*@[^"]*"' | tr -d '"'
}

# Nodes 2 and 3 join node 1, unless node 1 already sees them running.
join_nodes() {
	local running n
	running=$(running_nodes)
	for n in 2 3; do
		grep -qx "$(node_name "$n")" <<<"$running" && continue
		log "joining $(node_name "$n") to $(node_name 1)"
		ctl "$n" -q stop_app >&2
		ctl "$n" -q join_cluster "$(node_name 1)" >&2
		ctl "$n" -q start_app >&2
	done
}

# Waits until node 1 sees every node running.
wait_cluster() {
	ctl 1 -q await_online_nodes "${#NODES[@]}" --timeout "$BOOT_TIMEOUT" >&2 ||
		die "the cluster did not form; see the logs under $CLUSTER_DIR"
}

set_urls() {
	local n urls=()
	for n in "${NODES[@]}"; do
		urls+=("amqp://guest:guest@127.0.0.1:$(amqp_port "$n")")
	done
	local IFS=,
	echo "QUEUEY_CLUSTER=${urls[*]}"
}

# All nodes boot at once: after a full stop each waits for the peers it
# last saw, so starting them one by one could stall.
cmd_start() {
	prepare_dirs
	stop_stale_nodes
	local n started=()
	for n in "${NODES[@]}"; do
		is_alive "$n" && continue
		launch_node "$n"
		started+=("$n")
	done
	for n in "${NODES[@]}"; do
		wait_node "$n"
	done
	join_nodes
	wait_cluster
	log "running: ${#started[@]} node(s) started, ${#NODES[@]} in the cluster"
	set_urls
}

cmd_stop() {
	local clean=false n
	case ${1:-} in
	--clean) clean=true ;;
	"") ;;
	*) die "stop takes only --clean" ;;
	esac
	for n in 3 2 1; do
		is_alive "$n" || continue
		log "stopping $(node_name "$n")"
		ctl "$n" -q stop "$(pid_file "$n")" >&2
	done
	if $clean && [[ -d $CLUSTER_DIR ]]; then
		[[ -e $CLUSTER_DIR/$MARKER ]] || die "$CLUSTER_DIR is not a queuey cluster directory"
		for n in "${NODES[@]}"; do
			is_alive "$n" && die "$(node_name "$n") is still running"
		done
		log "deleting $CLUSTER_DIR"
		rm -rf "$CLUSTER_DIR"
	fi
}

cmd_kill() {
	check_node_arg "${1:-}"
	local pid
	pid=$(node_pid "$1") || die "$(node_name "$1") is not running"
	log "kill -9 $(node_name "$1") (pid $pid)"
	kill -9 "$pid"
	wait_gone "$pid"
}

# Waits (up to ten seconds) for a killed process to exit; a zombie counts
# as gone, since nothing may be reaping it.
wait_gone() {
	local pid=$1 i state
	for ((i = 0; i < 100; i++)); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 0
		[[ $state == Z ]] && return 0
		sleep 0.1
	done
	die "pid $pid did not exit"
}

cmd_start_node() {
	check_node_arg "${1:-}"
	prepare_dirs
	is_alive "$1" || launch_node "$1"
	wait_node "$1"
}

first_alive_node() {
	local n
	for n in "${NODES[@]}"; do
		is_alive "$n" && echo "$n" && return 0
	done
	die "no cluster node is running"
}

cmd_status() {
	ctl "$(first_alive_node)" cluster_status
}

# The JSON status has one member per line; the leader is the line whose
# Raft state is "leader", and its node name gives N.
cmd_node_of_leader() {
	local queue=${1:-} vhost=${2:-/} status leader n
	[[ -n $queue ]] || die "node-of-leader needs a queue name"
	status=$(ctl -T rabbitmq-queues "$(first_alive_node)" -q quorum_status \
		--vhost "$vhost" "$queue" --formatter json) ||
		die "cannot read the status of quorum queue '$queue' in vhost '$vhost'"
	leader=$(grep '"Raft State":"leader"' <<<"$status" |
		grep -o '"Node Name":"[^"]*"' | cut -d'"' -f4 || true)
	for n in "${NODES[@]}"; do
		if [[ $leader == "$(node_name "$n")" ]]; then
			echo "$n"
			return 0
		fi
	done
	die "no leader found for queue '$queue' (got '$leader')"
}

# Prints the usage from the top of this file; exits with $1 (2 by default,
# printing to stderr, since it is then a mistake).
usage() {
	local code=${1:-2} text
	text=$(sed -n '/^# Usage:/,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//')
	if ((code == 0)); then
		echo "$text"
	else
		echo "$text" >&2
	fi
	exit "$code"
}

main() {
	unset_rabbitmq_env
	check_ports
	local cmd=${1:-}
	shift || true
	case $cmd in
	urls) set_urls ;;
	help | -h | --help) usage 0 ;;
	start | stop | status | kill | start-node | node-of-leader)
		find_rabbitmq_bin
		case $cmd in
		start) cmd_start ;;
		stop) cmd_stop "$@" ;;
		status) cmd_status ;;
		kill) cmd_kill "$@" ;;
		start-node) cmd_start_node "$@" ;;
		node-of-leader) cmd_node_of_leader "$@" ;;
		esac
		;;
	*) usage ;;
	esac
}

main "$@"
