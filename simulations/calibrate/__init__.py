"""Fit the device model and the efficiency curves to the paper's published numbers.

``python -m simulations.calibrate`` (:mod:`.__main__`, whose docstring states the method) fits
and writes ``simulations/calibration.json``, which :mod:`simulations.devicemodel.fitted` loads.
One job a module, in the order the fit uses them:

* :mod:`.paper`: the transcribed cells of Tables 2-4 and the setup they ran under;
* :mod:`.params`: the free parameters and the flat vector the solver moves;
* :mod:`.predict`: the device model vectorised over the grid, each method's time on it;
* :mod:`.objective`: the weighted residuals (cells, ratios, caps, figures, priors);
* :mod:`.solver`: Levenberg-Marquardt in numpy;
* :mod:`.fit`: the driver (model order, B2 hypotheses, temperatures);
* :mod:`.evaluate`: hard-rule predictions, ratio errors, leave-one-out;
* :mod:`.floors`: the least ratio error any model of this class can reach;
* :mod:`.calibration_file`: the JSON written, and the committed fit read back;
* :mod:`.report`: the Markdown side-by-side table and the figures under the fit.
"""
