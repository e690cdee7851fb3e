"""What leaves the kit: the student release, the Gradescope zip, the leak
scan they both pass, and the demo that builds and grades both."""
