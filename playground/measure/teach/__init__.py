"""The maths the teaching tabs draw (explorer, lab, statistics, theory, points, tree budget): pure
functions of measurements, no session state and no Gradio."""
