"""Correctness of ModelNew against Model (verify.json) and the gate that lets only verified cases be timed."""
