"""Widgets shared by the screens: the virtualised table, the status header,
the plotext chart and the message tap."""
