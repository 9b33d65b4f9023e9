"""Keras layers as `nn.Module`s holding Keras' own weights and doing what Keras' call does, as
the Keras major that wrote a model computes it (docs/api.md, "Keras layers"; docs/porting.md,
"Whole models").

* `recurrent.py`: `KerasLSTM`, `KerasGRU`, `KerasSimpleRNN`, `KerasBidirectional`;
* `core.py`: Dense, Embedding, Activation, Masking and the noise layers (Dropout, ...);
* `normalization.py`: BatchNormalization, LayerNormalization;
* `convolutional.py`: Conv1D, pooling, padding, cropping, up-sampling;
* `reshaping.py`: Flatten, Reshape, Permute, RepeatVector;
* `merging.py`: Concatenate, Add, Subtract, Multiply, Average, Maximum, Minimum;
* `wrappers.py`: TimeDistributed;
* `activations.py`: Keras' activations by name, per major;
* `operations.py`: the Keras 3 ops a model's graph records (`x[:, :4]`, a mask's `not_equal`);
* `custom.py`: a layer of the user's own class, its module given at load;
* `model.py`: `KerasModel`, a whole model's graph of layer calls.
"""

from .base import Layer
from .convolutional import (
    KerasAveragePooling1D,
    KerasConv1D,
    KerasCropping1D,
    KerasGlobalAveragePooling1D,
    KerasGlobalMaxPooling1D,
    KerasMaxPooling1D,
    KerasUpSampling1D,
    KerasZeroPadding1D,
)
from .core import (
    KerasActivation,
    KerasActivityRegularization,
    KerasAlphaDropout,
    KerasDense,
    KerasDropout,
    KerasEmbedding,
    KerasGaussianDropout,
    KerasGaussianNoise,
    KerasMasking,
    KerasSpatialDropout1D,
)
from .custom import KerasCustomLayer
from .merging import (
    KerasAdd,
    KerasAverage,
    KerasConcatenate,
    KerasMaximum,
    KerasMinimum,
    KerasMultiply,
    KerasSubtract,
)
from .model import KerasModel
from .normalization import (
    KerasBatchNormalization,
    KerasLayerNormalization,
    KerasUnitNormalization,
)
from .operations import KerasOp
from .recurrent import KerasBidirectional, KerasGRU, KerasLSTM, KerasRNN, KerasSimpleRNN
from .reshaping import KerasFlatten, KerasPermute, KerasRepeatVector, KerasReshape
from .wrappers import KerasTimeDistributed

__all__ = [
    "KerasActivation",
    "KerasActivityRegularization",
    "KerasAdd",
    "KerasAlphaDropout",
    "KerasAverage",
    "KerasAveragePooling1D",
    "KerasBatchNormalization",
    "KerasBidirectional",
    "KerasConcatenate",
    "KerasConv1D",
    "KerasCropping1D",
    "KerasCustomLayer",
    "KerasDense",
    "KerasDropout",
    "KerasEmbedding",
    "KerasFlatten",
    "KerasGRU",
    "KerasGaussianDropout",
    "KerasGaussianNoise",
    "KerasGlobalAveragePooling1D",
    "KerasGlobalMaxPooling1D",
    "KerasLSTM",
    "KerasLayerNormalization",
    "KerasMasking",
    "KerasMaxPooling1D",
    "KerasMaximum",
    "KerasMinimum",
    "KerasModel",
    "KerasMultiply",
    "KerasOp",
    "KerasPermute",
    "KerasRNN",
    "KerasRepeatVector",
    "KerasReshape",
    "KerasSimpleRNN",
    "KerasSpatialDropout1D",
    "KerasSubtract",
    "KerasTimeDistributed",
    "KerasUnitNormalization",
    "KerasUpSampling1D",
    "KerasZeroPadding1D",
    "Layer",
]
