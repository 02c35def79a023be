"""Layers: one file each (or per family), its kernels in a .cl file of the same name."""
from .base import Layer
from .dense import Dense
from .activation import Activation, Softmax
from .flatten import Flatten
from .input import Input
from .merge import (Add, Average, Concatenate, Maximum, Minimum, Multiply, Subtract, add, average, concatenate, maximum,
                    minimum, multiply, subtract)
from .dropout import Dropout, GaussianNoise, SpatialDropout1D, SpatialDropout2D, SpatialDropout3D
from .batch_normalization import BatchNormalization
from .layer_normalization import LayerNormalization
from .locally_connected import LocallyConnected1D
from .conv import Conv1D, Conv2D
from .pooling import (AveragePooling1D, AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D,
                      GlobalMaxPooling1D, GlobalMaxPooling2D, MaxPooling1D, MaxPooling2D)
from .reshape import Reshape
from .zero_padding import ZeroPadding2D
from .cropping import Cropping1D, Cropping2D
from .upsampling import UpSampling1D, UpSampling2D
from .repeat_vector import RepeatVector
from .permute import Permute
from .relu import ELU, LeakyReLU, ReLU
from .prelu import PReLU
from .embedding import Embedding
from .masking import Masking
from .position_embedding import PositionEmbedding
from .simple_rnn import SimpleRNN
from .lstm import LSTM
from .gru import GRU
from .bidirectional import Bidirectional
from .multi_head_attention import MultiHeadAttention
from .lambda_layer import Lambda
from .time_distributed import TimeDistributed
from .weight import Constant, Variable, Weight

__all__ = ["Constant", "Variable", "Weight", "add", "concatenate", "multiply", "subtract", "average", "maximum",
           "minimum", "Subtract", "Average", "Maximum", "Minimum", "Layer", "Dense", "Activation", "Softmax", "Flatten", "Input", "Add", "Multiply", "Concatenate", "Dropout",
           "BatchNormalization", "LayerNormalization", "LocallyConnected1D", "Conv1D", "Conv2D",
           "MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D", "GlobalMaxPooling1D",
           "GlobalMaxPooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "Reshape", "ZeroPadding2D",
           "Cropping1D", "Cropping2D", "Masking", "UpSampling1D", "UpSampling2D",
           "RepeatVector", "Permute", "ReLU", "LeakyReLU", "ELU", "PReLU", "GaussianNoise", "SpatialDropout1D",
           "SpatialDropout2D", "SpatialDropout3D",
           "Embedding", "PositionEmbedding", "SimpleRNN", "LSTM", "GRU", "Bidirectional",
           "MultiHeadAttention", "Lambda", "TimeDistributed"]
