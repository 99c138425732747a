"""Data analyses that train nothing: solve-rate distributions, the paper's real-data summaries,
the DAPO curve fit and the statistics they share.  numpy only at import."""
