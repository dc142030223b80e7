#!/bin/sh
# Claim + release on an open session: the Node client beside the Go
# client, against one `baton serve`, alternating, in the same run.
#
#   clients/node/bench/compare.sh [rounds] [cycles]     (from the repository root)
set -eu
rounds=${1:-3}
cycles=${2:-2000}
tmp=$(mktemp -d)
trap 'kill $srv 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/baton" ./cmd/baton
go build -o "$tmp/goclaim" ./clients/node/bench/goclaim
"$tmp/baton" serve -listen 127.0.0.1:0 2>"$tmp/log" &
srv=$!
i=0
while ! addr=$(sed -n 's/.*msg="baton listening" addr=\([^ ]*\).*/\1/p' "$tmp/log") || [ -z "$addr" ]; do
	i=$((i + 1)); [ $i -lt 100 ] || { cat "$tmp/log"; exit 1; }; sleep 0.1
done
sleep 1 # the token gate of a new process
r=1
while [ $r -le "$rounds" ]; do
	"$tmp/goclaim" "$addr" "$cycles"
	node clients/node/bench/claim-release.mjs "$addr" "$cycles"
	r=$((r + 1))
done
