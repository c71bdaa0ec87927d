#!/usr/bin/env bash
# dsv4 bench --front-end on loopback, everything it needs started here:
# this tree's build/dsv4 serve, and for the throughput comparison the
# server of an older commit (OLD_COMMIT, default dfd04f4: the last one on
# cpp-httplib, one thread per connection) built beside it in
# build-front-end-old/ (a git worktree; libcpp-httplib-dev, which that
# commit needs, is installed for it). Both serve the embedded default
# model. The stalled part's streams are cut at a 240 s write timeout here
# (the default is 30 s) so that all of them are held at once, and measured held, before the
# first is cut. Stops both servers at the end; the exit code is the
# benchmark's (0 when every target is met).
# usage: scripts/bench_front_end.sh [dsv4 bench --front-end options...]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OLD_COMMIT:-dfd04f4}
old_dir=build-front-end-old
if [[ ! -x $old_dir/build/dsv4 || "$(git -C $old_dir rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$old")" ]]; then
  if ! dpkg -s libcpp-httplib-dev >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq libcpp-httplib-dev >/dev/null
  fi
  git worktree remove --force $old_dir 2>/dev/null || rm -rf $old_dir
  git worktree add --force --detach $old_dir "$old" >/dev/null
  cmake -S $old_dir -B $old_dir/build -DCMAKE_BUILD_TYPE=Release -DDSV4_TESTS=OFF >/dev/null
  cmake --build $old_dir/build -j"$(nproc)" --target dsv4
fi
[[ -x build/dsv4 ]] || { echo "bench_front_end: build/dsv4 is missing (scripts/setup.sh builds it)" >&2; exit 2; }

logs=$(mktemp -d /tmp/dsv4-front-end-XXXXXX)
start() {  # start LOGNAME BINARY [SERVE OPTIONS...]: prints the port it serves on
  local name=$1 bin=$2
  shift 2
  "$bin" serve --port 0 --max-queue 4096 "$@" >"$logs/$name.log" 2>&1 &
  echo $! >"$logs/$name.pid"
  for _ in $(seq 1 200); do
    local port
    port=$(grep -oE 'serving \S+ on http://127\.0\.0\.1:[0-9]+' "$logs/$name.log" | grep -oE '[0-9]+$' || true)
    if [[ -n $port ]]; then
      echo "$port"
      return
    fi
    sleep 0.1
  done
  echo "bench_front_end: $name did not start:" >&2
  cat "$logs/$name.log" >&2
  exit 2
}
stop() {
  for pid in "$logs"/*.pid; do kill -TERM "$(cat "$pid")" 2>/dev/null || true; done
  for pid in "$logs"/*.pid; do
    for _ in $(seq 1 300); do kill -0 "$(cat "$pid")" 2>/dev/null || break; sleep 0.1; done
  done
}
trap stop EXIT

ours=$(start new build/dsv4 --http-write-timeout-ms 240000)
theirs=$(start old $old_dir/build/dsv4)
echo "this tree: port $ours; $old: port $theirs (server logs in $logs)"
set +e
build/dsv4 bench --front-end --port "$ours" --compare-port "$theirs" "$@"
code=$?
set -e
exit $code
