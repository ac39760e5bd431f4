"""Weights made when a graph builder reads them, not before: a mapping from kvx name to a function that makes
the array (reading it from a checkpoint, dequantizing, permuting). A builder reads each weight once, as it
adds its initializer, and with external data writes it out at once (external_data_file.py), so an exporter
holds one weight at a time however large the model."""

from collections.abc import Mapping


class WeightsOnDemand(Mapping):
    """name -> make(), called at every read (nothing is kept: a cache would hold the whole model again)."""

    def __init__(self, makers):
        self._makers = dict(makers)

    def __getitem__(self, name):
        return self._makers[name]()

    def __iter__(self):
        return iter(self._makers)

    def __len__(self):
        return len(self._makers)
