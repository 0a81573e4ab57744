"""The C toolchain: building generated stacks and the runtime, finding rubikgen's data, reading handler sources."""
