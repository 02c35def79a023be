// The dense products' GPU forms, the same kernels as cpu_blocks.cl's (its comments say what each
// computes and why the layouts): here W and delta are one row-major panel, P = units_p, or a joined
// layer's parts' width. A tiled program pastes this file (what every tiled form shares), then a
// tensor-core form's files (tensor_cores.cl and mma.cl or wgmma.cl: the tile geometry and the slice
// product of that form), then gpu_tiles.cl (the CUDA cores' geometry and slice product wherever no
// form gave its own, the staging and the kernels).
// Products are written "acc += a * b", which OpenCL compilers contract to FMA.

// STORE_PRE: as in cpu_blocks.cl.
#ifndef STORE_PRE
#define STORE_PRE 1
#endif
// STORE_SLOPES = 1 (the GPU form, where f' needs z): the forward stores f'(z) in z's place, and the
// weight gradient multiplies dL/dy by it as it fetches it. It used to fetch y and z there and
// compute f' inside the K loop: the tiny GPT's GELU layer (8192 x 256 -> 1024, WGMMA) took
// markedly longer for its weight gradient than a linear layer's; this way it comes close to the
// linear layer's, while the forward, whose erf f' shares, became only slightly slower
// (benchmarks/RESULTS.md, f'(z) kept by the forward).
#ifndef STORE_SLOPES
#define STORE_SLOPES 0
#endif

// The GPU form of the same three products: a work-group of (TILE/WPT)^2 work-items computes a
// TILE x TILE block of the result, staging TK-deep slices of both operands in local memory; each
// work-item accumulates WPT x WPT outputs in runs of 4 (OWN below), so that it reads local memory
// one TYPE4 at a time and neighbouring work-items read neighbouring TYPE4s. While a slice is
// multiplied, the next one is already on its way from global memory into registers. W and delta
// are row-major here (a single panel, P = units_p). WPT is a multiple of 4.
// Aligned runs of 4 are read and written through TYPE4 pointers, and local memory is declared as
// TYPE4: vload4/vstore4 only promise TYPE alignment, and NVIDIA's compiler splits them into four
// scalar accesses (with them, 4096^3 ran markedly slower than with TYPE4 accesses).
// Buffers start aligned and such a run starts at a multiple of 4 of a row whose length is one.
#define SIDE (TILE / WPT)
#define ITEMS (SIDE * SIDE)
// TYPE4s of one operand's slice that each work-item moves.
#define LOADS (TILE * TK / 4 / ITEMS)
#if TILE * TK % (4 * ITEMS) || WPT % 4
#error "a slice must split into whole TYPE4s per work-item, and WPT be a multiple of 4"
#endif
// The i-th of a work-item's WPT rows (columns) within the block, for local index t.
#define OWN(t, i) (((i) / 4) * 4 * SIDE + (t) * 4 + (i) % 4)
#ifndef MMA
#define MMA 0
#endif
#ifndef WGMMA
#define WGMMA 0
#endif
