"""The lab library: compile for sm_90 from anywhere, count instructions, time, budget shared
memory, build widgets, check exercises, plot. Each module is small and named for what it holds."""
