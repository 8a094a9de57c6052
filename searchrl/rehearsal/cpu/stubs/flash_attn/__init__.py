"""Stand-in for the two flash-attn modules OpenRLHF imports unconditionally
(`openrlhf/models/ring_attn_utils.py`): the padding helpers sample packing uses, in plain torch.
Ring attention (`ds.ring_attn_size > 1`) is not rehearsed on CPU."""

__version__ = "0.0.0+searchrl.cpu"
