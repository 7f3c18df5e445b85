"""Plots (:mod:`.plots`, inline SVG from matplotlib) and the self-contained HTML run report (:mod:`.html`)."""
