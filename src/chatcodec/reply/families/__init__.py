"""Reply families: each module describes one family's markup as a ReplyFormat (data only)."""
