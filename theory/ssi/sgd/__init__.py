"""Online spherical SGD at finite d: the shared loop (``driver``), the full d-dimensional
simulator (``full``), the exact reduced chain (``reduced``), many seeds kept in a result store
(``seeds``), and their numba kernels (``_kernels``, ``_blocknormal``)."""
