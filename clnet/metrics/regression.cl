// Regression metrics, Keras's: the value of one position (the mean over its columns) for
// metrics/mean.cl's UpdateMean. RootMeanSquaredError sums MEAN_SQUARED_ERROR and takes the root
// of the mean on the host.

#define MEAN_SQUARED_ERROR 0
#define MEAN_ABSOLUTE_ERROR 1
#define MEAN_ABSOLUTE_PERCENTAGE_ERROR 2
#define MEAN_SQUARED_LOGARITHMIC_ERROR 3

inline TYPE metric_value(const int kind, __global const TYPE *t, __global const TYPE *p, const int cols,
                         const TYPE parameter)
{
    TYPE sum = 0;
    for (int j = 0; j < cols; j++) {
        const TYPE e = p[j] - t[j];
        if (kind == MEAN_SQUARED_ERROR)
            sum += e * e;
        else if (kind == MEAN_ABSOLUTE_ERROR)
            sum += fabs(e);
        else if (kind == MEAN_ABSOLUTE_PERCENTAGE_ERROR)
            sum += fabs(e / fmax(fabs(t[j]), EPSILON));
        else {
            const TYPE d = log(fmax(p[j], EPSILON) + 1) - log(fmax(t[j], EPSILON) + 1);
            sum += d * d;
        }
    }
    return (kind == MEAN_ABSOLUTE_PERCENTAGE_ERROR ? 100 : 1) * sum / cols;
}
