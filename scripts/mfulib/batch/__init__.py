"""A whole benchmark level in one command (mfu_batch.py): plan, jobs, runners (local pool or Ray) and the summary."""
