// The fused activation on VW lanes at once (-D VW, ACT, ACT_VECTOR), for kernels that hold a
// block of VW columns in a VEC: ACT_FORWARD_V(x, a, b) and ACT_DERIVATIVE_V(y, x, a, b). Its
// vector form where it has one (ACT_VECTOR = 1, see Activation.vector_form), else its scalar
// function lane by lane. PoCL's vector forms of exp, tanh and erf cost an element a small
// fraction of what a call of its scalar ones costs (benchmarks/RESULTS.md, activations on vector
// lanes).
#define DEFINE_LANES(name, FORWARD, DERIVATIVE)                                                  \
__attribute__((always_inline))                                                                  \
VEC name##Forward(const VEC x, const TYPE a, const TYPE b)                                     \
{                                                                                               \
    VEC y;  /* lanes through TYPE pointers: PoCL 3.0 calls vloadN/vstoreN (see TYPE4_U) */      \
    const TYPE *in = (const TYPE *)&x;                                                          \
    TYPE *out = (TYPE *)&y;                                                                     \
    for (int l = 0; l < VW; l++)                                                                \
        out[l] = FORWARD(in[l], a, b);                                                          \
    return y;                                                                                   \
}                                                                                               \
__attribute__((always_inline))                                                                  \
VEC name##Derivative(const VEC y, const VEC x, const TYPE a, const TYPE b)                     \
{                                                                                               \
    VEC d;                                                                                      \
    const TYPE *ys = (const TYPE *)&y, *xs = (const TYPE *)&x;                                  \
    TYPE *out = (TYPE *)&d;                                                                     \
    for (int l = 0; l < VW; l++)                                                                \
        out[l] = DERIVATIVE(ys[l], xs[l], a, b);                                                \
    return d;                                                                                   \
}
// The vector form on VEC's two halves, where it takes them (AVEC, see cl/common.cl).
#define DEFINE_HALVES(name, FORWARD, DERIVATIVE)                                                 \
__attribute__((always_inline))                                                                  \
VEC name##Forward(const VEC x, const TYPE a, const TYPE b)                                     \
{                                                                                               \
    return (VEC)(FORWARD(x.lo, a, b), FORWARD(x.hi, a, b));                                     \
}                                                                                               \
__attribute__((always_inline))                                                                  \
VEC name##Derivative(const VEC y, const VEC x, const TYPE a, const TYPE b)                     \
{                                                                                               \
    return (VEC)(DERIVATIVE(y.lo, x.lo, a, b), DERIVATIVE(y.hi, x.hi, a, b));                   \
}
#if ACT_VECTOR && HALVED_VEC
DEFINE_HALVES(ActHalves, CAT(ACT, _forward_vector), CAT(ACT, _derivative_vector))
#define ACT_FORWARD_V ActHalvesForward
#define ACT_DERIVATIVE_V ActHalvesDerivative
#elif ACT_VECTOR
#define ACT_FORWARD_V CAT(ACT, _forward_vector)
#define ACT_DERIVATIVE_V CAT(ACT, _derivative_vector)
#else
DEFINE_LANES(ActLanes, ACT_FORWARD, ACT_DERIVATIVE)
#define ACT_FORWARD_V ActLanesForward
#define ACT_DERIVATIVE_V ActLanesDerivative
#endif
