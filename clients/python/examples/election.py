"""Leader election: run several candidates and an observer.

    python3 examples/election.py 127.0.0.1:7070 campaign 10.0.0.5:5432
    python3 examples/election.py 127.0.0.1:7070 observe

A candidate leads until it is stopped (Ctrl-C) or loses its claim; the
next candidate then leads with a larger fencing token.
"""

import sys

import baton

addr, role = sys.argv[1], sys.argv[2]
client = baton.Client(addr, lease=5)

with client.session(label=role) as s:
    e = s.election("db-primary")
    if role == "campaign":
        token = e.campaign(sys.argv[3])
        print("leading with token", token)  # pass the token to what you write
        try:
            e.lost.wait()  # serve until the leadership is lost
            print("lost:", e.claim.error)
        except KeyboardInterrupt:
            e.resign()  # the next candidate leads at once
    else:
        for leader in e.observe():
            print("no leader" if leader is None else "leader %s at %s (token %d)"
                  % (leader.label, leader.value.decode(), leader.token))
