"""The lab library, at the bottom of the package: it imports nothing from kernels.ops, kernels.lessons
or kernels.tools. The run mode (``mode``), compiling for sm_90 from anywhere (``aot``, with Triton's
internals kept in ``triton_internals``), instruction counts (``isa``), timing (``bench``), recorded
results (``results``) and the one source every lesson asks for a figure (``measure``), shared-memory
budgets (``smem``), TMA rules (``tma_rules``), the widget skeleton (``widgets``), exercise checks
(``check``), plots and display helpers. Each module is small and named for what it holds."""
