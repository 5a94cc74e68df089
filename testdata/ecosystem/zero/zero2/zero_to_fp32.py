# DeepSpeed copies its zero_to_fp32.py here; this replica holds a placeholder.
