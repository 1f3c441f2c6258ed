"""Stand-in: see ../../README.md."""


def to_tensor(*args: object, **kwargs: object) -> object:
    raise RuntimeError("stand-in torchvision (bench/standins): not for real use")
