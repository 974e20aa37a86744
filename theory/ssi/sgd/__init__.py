"""Online spherical SGD at finite d: full-d runs, the exact reduced chain, their kernels."""
