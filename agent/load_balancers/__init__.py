"""Load balancers on this node (issue 10, area B): the engines' configurations, their health,
and the TLS certificates of those on port 443."""
