"""Spec test vectors: YAML files of packets and the events, streams and flows a stack must
produce from them (`rubikgen test`)."""
