"""Step 3, the numerator: the flops.py contract, its drafts (flops_generator.py), the independent tracer and the
checker (check_flops.py), the element-cost table and the torch_npu stand-ins."""
