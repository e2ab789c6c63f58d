"""The pipeline as make runs it: the step graph read from the Makefile and the state of a work directory's steps
(``make status``, ``prepare_op_dir.py --check/--status``). It sits above every step: it reads their reports."""
