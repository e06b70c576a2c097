"""What an evaluator hands into the box it grades in: plain scripts, read as text and written into the box's
HOME, run by the task's own interpreter (so: standard library only, and old Pythons' syntax)."""
