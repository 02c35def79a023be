// PositionEmbedding (keras_hub's): the first `positions` rows of a learned (sequence_length,
// features) table, the same for every sample of the batch; the input gives only the shape.

__kernel void FeedForwardPositionEmbedding(__global const TYPE *table,  // (sequence_length, features)
                                           __global TYPE *outputs,      // (rows, positions, features)
                                           const int width)             // positions * features
{
    const int element = get_global_id(0), row = get_global_id(1);
    outputs[(long)row * width + element] = table[element];
}

// dL/dtable: for the rows in use, the sum over the batch of dL/doutputs at each element (one
// work-item per element, adding the samples in order); rows beyond the input's length get 0.
__kernel void CalcDeltaWeightsPositionEmbedding(__global const TYPE *gradients,  // (rows, positions, features)
                                                __global TYPE *table_grad,       // (sequence_length, features)
                                                const int rows, const int width)
{
    const int element = get_global_id(0);
    TYPE sum = 0;
    for (int row = 0; element < width && row < rows; row++)
        sum += gradients[(long)row * width + element];
    table_grad[element] = sum;
}
