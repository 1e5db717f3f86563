"""The paper, readable in one sitting: squash, the two losses, dynamic routing, capsule layers, CapsNet.

Imports torch only. The reader's path through it: ``squashing`` -> ``losses`` -> ``routing`` ->
``layers`` -> ``capsnet`` (and ``heads``, the two networks of Su's two-digit experiment). The book prints these functions as they stand. Arguments are checked where a user
enters (``checks``: the constructors and ``CapsNet.capsules``); the maths trusts its input.
"""

from capsedu.core.capsnet import CapsNet, CapsNetConfig, Decoder
from capsedu.core.heads import CapsuleClassifier, ConvStack, PoolingClassifier
from capsedu.core.layers import DenseCapsules, PrimaryCapsules, RoutedCapsules, SharedCapsules
from capsedu.core.losses import margin_loss, reconstruction_loss
from capsedu.core.params import count_parameters
from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.core.squashing import NORM_COMPRESSIONS, compress, safe_norm, squash

__all__ = ["squash", "safe_norm", "compress", "NORM_COMPRESSIONS", "margin_loss", "reconstruction_loss", "dynamic_routing", "ROUTING_MODES", "PrimaryCapsules", "RoutedCapsules", "DenseCapsules", "SharedCapsules", "CapsNet", "CapsNetConfig", "Decoder", "ConvStack", "PoolingClassifier", "CapsuleClassifier", "count_parameters"]
