"""Raw frames and steps: the lowest layer of intake (issue 27).

:mod:`.records` parses and validates a raw frame (or a batch) into a record, never echoing a
reading; :mod:`.steps` numbers the chain's steps (redeliveries, missing slots). Both depend on the
standard library only, so the model (``model/calibrate.py`` reads recordings as frames), ``ingest/``
and ``stream/`` import them from below: the layers read model → mechanisms → audit/ledger →
ingest → stream → consumer.
"""
