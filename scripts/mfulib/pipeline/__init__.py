"""The pipeline as make runs it: the step graph read from the Makefile and the state of a work directory's steps
(``make status``, ``prepare_op_dir.py --check/--status``), and how make runs a step: the device lock and the step's
signals (``scripts/device_lock.py``). It sits above every step: it reads their reports."""
