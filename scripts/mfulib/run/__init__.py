"""How operator code is run: the Triton-Ascend compatibility layer, the interpreter launch hook, persistent
workers, the trace zygote and the fd-level noise filter."""
