"""Profiles of producers and consumers: thread time split, off/on-CPU stacks, lock waits."""
