#!/bin/sh
# nightly-import.sh: runs ./import.sh on at most one machine at a time.
#
# Install this script and import.sh on every machine, and start it from
# every machine's crontab at the same time (see README.md). The copy that
# takes the lock "nightly-import" first runs the import; every other copy
# exits at once with status 75 (EX_TEMPFAIL): the lock is busy.
#
# BATON_SERVER (host:port) says where the baton server is.
cd "$(dirname "$0")" || exit 1
# --no-wait: skip this run if another machine's run holds the lock.
# --lease 30s: a hung machine can block the others for at most 30s (a
# crashed one frees the lock at once), and short network hiccups do not
# cost the lock.
exec baton run --no-wait --lease 30s nightly-import -- ./import.sh
