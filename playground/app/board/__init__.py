"""The Drafts tab: the drafts board, every way of drafting for the loaded target side by side."""
