"""Widgets shared by the screens: the virtualised table, the status header,
the line chart and the message tap."""
