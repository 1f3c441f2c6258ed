"""Stand-in: the classes exist so `import streaming` works; using them raises."""


class VisionDataset:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("stand-in torchvision (bench/standins): not for real use")


class CIFAR10(VisionDataset):
    pass
