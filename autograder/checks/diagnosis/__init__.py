"""Where a failing submission's values leave the reference's path.

``steps`` names the reference's steps (data), ``flow`` walks a student's
recorded tensors against them, ``relations`` names a simple relation that
explains a difference, ``attach`` runs the value-traced probes for the
failing cases and adds the lines to the feedback.
"""
