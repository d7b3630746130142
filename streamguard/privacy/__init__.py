"""What every mechanism and account shares: the rule for a budget ε (:mod:`.budget`), local
channels — the emission tables of every per-record mechanism (:mod:`.channel`) — and ε loads on
positions kept as run-lengths (:mod:`.runs`)."""
