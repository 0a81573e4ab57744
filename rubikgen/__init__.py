"""rubikgen: declarative protocol-stack specs compiled to C for middleboxes."""

__version__ = "0.1.0"
