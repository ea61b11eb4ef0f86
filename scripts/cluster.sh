#!/usr/bin/env bash
# N replicas of `rewind serve` sharing one Redis (--cache-redis), behind HAProxy 2.6 that keeps a
# conversation on one replica while it is up and moves it to another when it is down, where the
# shared tier lets it resume (docs/ARCHITECTURE.md, "Replicas behind a load balancer").
# Usage: scripts/cluster.sh N [--model DIR] [--port P] [--binary PATH] [-- serve options...]
#   N         replicas (1-32)
#   --model   the model (default: the tiny built-in model, made in the state directory)
#   --port    HAProxy's port (default 8080; 0: a free one); it prints "cluster: listening on URL"
#   --binary  the rewind binary (default build/release/rewind)
# Runs until SIGINT or SIGTERM, then stops everything it started. State (configuration, logs)
# in a temporary directory it prints. Needs redis-server and haproxy (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
n="$1"; shift
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 32 ] || usage
model="" port=8080 binary=build/release/rewind
serve_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    --) shift; serve_args=("$@"); break ;;
    *) usage ;;
  esac
done
for tool in redis-server haproxy python3; do
  command -v "$tool" >/dev/null || { echo "cluster.sh: $tool is not installed" >&2; exit 1; }
done
[ -x "$binary" ] || { echo "cluster.sh: no binary at $binary (scripts/build.sh release)" >&2; exit 1; }

state="$(mktemp -d /tmp/rewind_cluster_XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# Free TCP ports from the kernel (bound to port 0, then released).
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

if [ -z "$model" ]; then
  model="$state/tiny"
  "$binary" make-model --preset tiny --out "$model" >/dev/null
fi
read -r -a ports <<<"$(free_ports $((n + 2)))"
redis_port="${ports[n]}"
[ "$port" = 0 ] && port="${ports[n + 1]}"

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$state" \
  --maxmemory 1gb --maxmemory-policy allkeys-lru >"$state/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.05
done

backends=""
for i in $(seq 0 $((n - 1))); do
  "$binary" serve --model "$model" --port "${ports[i]}" \
    --cache-redis "redis://127.0.0.1:$redis_port" ${serve_args[@]+"${serve_args[@]}"} >"$state/replica$i.log" 2>&1 &
  pids+=($!)
  echo $! >"$state/replica$i.pid"
  backends+="  server r$i 127.0.0.1:${ports[i]} check inter 500 fall 2 rise 2"$'\n'
done

# Routing: the client's X-Rewind-Session header when it sends one, else the first 512 bytes of
# the body (the model and the opening messages of a chat: the same for every turn of one
# conversation). Consistent hashing: a replica going down moves only its conversations.
cat >"$state/haproxy.cfg" <<CFG
global
  log stderr format short local0 warning
defaults
  mode http
  timeout connect 2s
  timeout client 600s
  timeout server 600s
  option http-buffer-request
  option redispatch
  retries 2
frontend rewind
  bind 127.0.0.1:$port
  http-request set-var(txn.route) req.hdr(x-rewind-session) if { req.hdr(x-rewind-session) -m found }
  http-request set-var(txn.route) req.body,bytes(0,512) unless { var(txn.route) -m found }
  default_backend replicas
backend replicas
  balance hash var(txn.route)
  hash-type consistent
  option httpchk GET /health
  http-response set-header X-Rewind-Replica %s
$backends
CFG
haproxy -c -q -f "$state/haproxy.cfg"
for i in $(seq 0 $((n - 1))); do
  for _ in $(seq 600); do
    grep -q "listening on" "$state/replica$i.log" && break
    sleep 0.05
  done
  grep -q "listening on" "$state/replica$i.log" || {
    echo "cluster.sh: replica $i did not start:" >&2
    cat "$state/replica$i.log" >&2
    exit 1
  }
done
haproxy -f "$state/haproxy.cfg" -db >"$state/haproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
  sleep 0.05
done
echo "cluster: state in $state (logs, haproxy.cfg)"
echo "cluster: redis on 127.0.0.1:$redis_port; replicas on ports ${ports[*]:0:n}"
echo "cluster: listening on http://127.0.0.1:$port"
wait "${pids[0]}"
