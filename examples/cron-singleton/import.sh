#!/bin/sh
# import.sh: stands in for the real nightly import. baton run starts it
# with the lock held and adds two variables to its environment:
#
#   BATON_LOCK   the lock's name, "nightly-import"
#   BATON_TOKEN  the fencing token of this run, larger than every earlier
#                run's: hand it to the database so that it can refuse the
#                writes of an older run (see ../fenced-postgres)
#
# If the lock is lost while it runs, it gets SIGTERM (and SIGKILL 10s
# later) and baton run exits 76.
set -eu
src=${IMPORT_SOURCE:-/srv/exports/nightly.csv}
echo "import: started with token $BATON_TOKEN, reading $src"
rows=$(wc -l <"$src")
echo "import: done, $rows rows imported"
