"""The fenced Delta sink (``sink``): one append per epoch carrying its Delta transaction marker;
and its fill.
"""
