#!/usr/bin/env bash
# Emulated multi-node cluster: network namespaces as "nodes", a star through a bridge
# namespace, each node's egress shaped with tbf; Open MPI launched across them.
#
#   cluster.sh up N [--rate RATE|none] [--burst B] [--latency L] [--duplex]
#   cluster.sh run -n NP --ranks-per-node K [mpiexec args] -- cmd...
#   cluster.sh status
#   cluster.sh down
#
# Environment: ZC_PREFIX (name prefix, default "zc"), ZC_STATE_DIR (default
# /run/zipcoll-cluster-$ZC_PREFIX), ZC_SUBNET (first three octets, default 198.18.0).
# See README.md next to this file.
set -euo pipefail

HERE="$(cd "${BASH_SOURCE[0]%/*}" && pwd)"   # no dirname: usable with a bare PATH
PREFIX="${ZC_PREFIX:-zc}"
STATE_DIR="${ZC_STATE_DIR:-/run/zipcoll-cluster-$PREFIX}"
SUBNET="${ZC_SUBNET:-198.18.0}"        # benchmarking range 198.18.0.0/15 only
NETMASK=24
[[ $SUBNET =~ ^198\.1[89]\.[0-9]{1,3}$ ]] || { echo "cluster.sh: ZC_SUBNET must lie in 198.18.0.0/15" >&2; exit 1; }
BRIDGE_NS="$PREFIX-br"
NODE_IF="${PREFIX}0"                   # same name in every node, for btl_tcp_if_include

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

node_ns() { echo "$PREFIX-node$1"; }
node_addr() { echo "$SUBNET.$(($1 + 1))"; }

require_root_tools() {
    ((EUID == 0)) || die "must run as root (network namespaces, tc)"
    local tool
    for tool in ip tc unshare; do
        command -v "$tool" >/dev/null || die "'$tool' not found (needs iproute2/util-linux)"
    done
}

# --- rates --------------------------------------------------------------------

# Bits per second of a tc rate such as 200mbit, 1gbit, 10gbit (bit units only).
rate_bps() {
    local r="${1,,}" num unit
    [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit)$ ]] || die "rate '$1': use <int>bit|kbit|mbit|gbit|tbit or 'none'"
    num=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
    case $unit in
        bit) echo "$num" ;; kbit) echo $((num * 1000)) ;; mbit) echo $((num * 1000000)) ;;
        gbit) echo $((num * 1000000000)) ;; tbit) echo $((num * 1000000000000)) ;;
    esac
}

# About 1 ms of data at the rate (a fixed 64kb burst caps a veth near 3.7 Gbit/s).
default_burst() {
    local bytes=$(( $(rate_bps "$1") / 8 / 1000 ))
    (( bytes < 8192 )) && bytes=8192     # at least a few full-size frames
    echo "${bytes}b"
}

# --- up / down ------------------------------------------------------------------

make_bridge() {
    ip netns add "$BRIDGE_NS"
    ip -n "$BRIDGE_NS" link set lo up
    ip -n "$BRIDGE_NS" link add br0 type bridge
    ip -n "$BRIDGE_NS" link set br0 up
}

# Node i: namespace, veth into the bridge namespace (never in the root namespace), address.
make_node() {
    local i=$1 ns port
    ns=$(node_ns "$i"); port="p$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$BRIDGE_NS" link add "$port" type veth peer name "$NODE_IF" netns "$ns"
    ip -n "$BRIDGE_NS" link set "$port" master br0 up
    ip -n "$ns" addr add "$(node_addr "$i")/$NETMASK" dev "$NODE_IF"
    ip -n "$ns" link set "$NODE_IF" up
}

# Egress shaping on the node side; with --duplex also the bridge port (the node's ingress).
shape_node() {
    local i=$1 rate=$2 burst=$3 latency=$4 duplex=$5
    [[ $rate == none ]] && return 0
    tc -n "$(node_ns "$i")" qdisc add dev "$NODE_IF" root tbf rate "$rate" burst "$burst" latency "$latency"
    if [[ $duplex == 1 ]]; then
        tc -n "$BRIDGE_NS" qdisc add dev "p$i" root tbf rate "$rate" burst "$burst" latency "$latency"
    fi
}

# /etc/netns/NS/hosts is bind-mounted over /etc/hosts by `ip netns exec`: names resolve per node.
write_hosts() {
    local n=$1 i j
    for ((i = 0; i < n; i++)); do
        mkdir -p "/etc/netns/$(node_ns "$i")"
        {
            echo "127.0.0.1 localhost"
            for ((j = 0; j < n; j++)); do echo "$(node_addr "$j") $(node_ns "$j")"; done
        } >"/etc/netns/$(node_ns "$i")/hosts"
    done
}

write_state() {
    local n=$1 rate=$2 burst=$3 latency=$4 duplex=$5 i
    mkdir -p "$STATE_DIR"
    printf 'nodes=%s\nrate=%s\nburst=%s\nlatency=%s\nduplex=%s\nsubnet=%s.0/%s\nnode_if=%s\n' \
        "$n" "$rate" "$burst" "$latency" "$duplex" "$SUBNET" "$NETMASK" "$NODE_IF" >"$STATE_DIR/state"
    : >"$STATE_DIR/nodes"
    for ((i = 0; i < n; i++)); do
        echo "$(node_ns "$i") $(node_ns "$i") $(node_addr "$i")" >>"$STATE_DIR/nodes"   # ns host addr
    done
}

cmd_up() {
    local n="" rate=1gbit burst="" latency=50ms duplex=0
    while (($#)); do
        case $1 in
            --rate) rate=$2; shift 2 ;;
            --burst) burst=$2; shift 2 ;;
            --latency) latency=$2; shift 2 ;;
            --duplex) duplex=1; shift ;;
            -*) die "up: unknown option $1" ;;
            *) n=$1; shift ;;
        esac
    done
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: need a node count N (1..200)"
    require_root_tools
    [[ $rate == none ]] || { rate_bps "$rate" >/dev/null; burst=${burst:-$(default_burst "$rate")}; }
    cmd_down >/dev/null 2>&1 || true           # idempotent: clear any previous or half-made cluster
    trap 'log "up failed; cleaning up"; cmd_down >/dev/null 2>&1' EXIT   # set -e exits on any failure
    make_bridge
    local i
    for ((i = 0; i < n; i++)); do
        make_node "$i"
        shape_node "$i" "$rate" "${burst:-0}" "$latency" "$duplex"
    done
    write_hosts "$n"
    write_state "$n" "$rate" "${burst:-}" "$latency" "$duplex"
    trap - EXIT
    log "up: $n nodes ($(node_ns 0)..$(node_ns $((n - 1)))), $SUBNET.0/$NETMASK, rate $rate${burst:+ burst $burst}"
}

# Every namespace with our prefix, whether or not the state file knows it.
our_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(node[0-9]+|br)$" || true
}

# Kill leftover processes (prted, ranks) in a namespace, by pid: TERM, then KILL.
kill_ns_pids() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] && return 0
    kill -TERM $pids 2>/dev/null || true
    sleep 0.5
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
}

cmd_down() {
    ((EUID == 0)) || die "must run as root"
    local ns removed=0
    for ns in $(our_namespaces); do
        kill_ns_pids "$ns"
        ip netns del "$ns" && removed=$((removed + 1))
        rm -rf "/etc/netns/$ns"
    done
    rm -rf /etc/netns/"$PREFIX"-node* "$STATE_DIR"
    rmdir /etc/netns 2>/dev/null || true       # only if nothing else uses it
    log "down: removed $removed namespaces"
}

cmd_status() {
    [[ -f $STATE_DIR/state ]] || { echo "no cluster (state dir $STATE_DIR)"; our_namespaces; return 0; }
    cat "$STATE_DIR/state"
    local ns host addr
    while read -r ns host addr; do
        echo "--- $ns  host=$host  addr=$addr  pids=$(ip netns pids "$ns" | wc -l)"
        ip -n "$ns" -brief addr show dev "$NODE_IF"
        tc -n "$ns" -s qdisc show dev "$NODE_IF" | sed 's/^/    /'
    done <"$STATE_DIR/nodes"
    echo "--- $BRIDGE_NS"
    ip -n "$BRIDGE_NS" -brief link show
}

# --- run ------------------------------------------------------------------------

state_get() { sed -n "s/^$1=//p" "$STATE_DIR/state"; }

write_hostfile() {
    local k=$1 ns host addr
    while read -r ns host addr; do echo "$host slots=$k"; done <"$STATE_DIR/nodes" >"$STATE_DIR/hostfile"
}

# -x for each of these that the caller has set, so remote ranks see the same Python.
export_flags() {
    local v
    for v in PATH PYTHONPATH VIRTUAL_ENV LD_LIBRARY_PATH OMP_NUM_THREADS; do
        [[ -n ${!v:-} ]] && printf -- '-x\n%s\n' "$v"
    done
    return 0
}

cmd_run() {
    local np="" k="" extra=()
    while (($#)); do
        case $1 in
            -n | -np) np=$2; shift 2 ;;
            --ranks-per-node) k=$2; shift 2 ;;
            --) shift; break ;;
            *) extra+=("$1"); shift ;;
        esac
    done
    (($#)) || die "run: missing '-- cmd...'"
    [[ -f $STATE_DIR/state ]] || die "run: no cluster is up (state dir $STATE_DIR); run 'up N' first"
    local nodes subnet
    nodes=$(state_get nodes); subnet=$(state_get subnet)
    k=${k:-1}; np=${np:-$((nodes * k))}
    ((np <= nodes * k)) || die "run: -n $np exceeds $nodes nodes x $k ranks per node"
    write_hostfile "$k"
    local yield=0
    ((np > $(nproc))) && yield=1             # oversubscribed cores: busy-polling ranks starve each other
    local exports; mapfile -t exports < <(export_flags)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export PRTE_MCA_plm_ssh_agent="$HERE/netns-agent"   # prte 3.x's name; plm_rsh_agent is not read
    export PRTE_MCA_plm_ssh_no_tree_spawn=1              # launch every prted from node 0
    export ZC_STATE_DIR="$STATE_DIR"
    "$HERE/netns-agent" --exec "$(node_ns 0)" \
        mpiexec -n "$np" --hostfile "$STATE_DIR/hostfile" --map-by slot --bind-to none \
        --prtemca oob_tcp_if_include "$subnet" \
        --mca pml ob1 --mca btl self,sm,tcp --mca btl_tcp_if_include "$subnet" \
        --mca mpi_yield_when_idle "$yield" \
        "${exports[@]}" -x ZC_STATE_DIR "${extra[@]}" "$@"
}

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

main() {
    local sub=${1:-}
    (($#)) && shift
    case $sub in
        up) cmd_up "$@" ;;
        down) require_root_tools; cmd_down ;;
        run) require_root_tools; cmd_run "$@" ;;
        status) cmd_status ;;
        -h | --help) usage ;;
        *) usage; die "unknown subcommand '$sub'" ;;
    esac
}

main "$@"
