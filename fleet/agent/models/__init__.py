"""The models the paper trains, in plain PyTorch (torchvision does not import beside the CPU
torch): ResNet-18 and MobileNetV2 with a CIFAR stem (`convnets`), the character transformer
(`char_transformer`), what each takes as input, without torch (`inputs`), and the registry
that builds them by name with a batch of the right shape (`registry`).
"""
