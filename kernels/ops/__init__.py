"""The kernels, each beside its launcher: copies (lessons 01-03), GEMMs (00, 02-04), a transpose
(03), the pointer chase and a masked scale (00), the source article's GEMM (03), TileLang's copy
and GEMM (05)."""
