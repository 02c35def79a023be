// Shared by every update kernel. Parameters, gradients and moments are flat arrays of `total`
// elements; each work-item updates four of them through ToVect4/D4ToArray.

// The gradient of loss + l1 |w| + l2 w^2 (Keras's regularizer convention).
inline TYPE4 regularized(const TYPE4 g, const TYPE4 w, const TYPE l1, const TYPE l2)
{
    return g + l1 * sign(w) + 2 * l2 * w;
}
