// Draws the Plotly figures the server built (charts.py): each
// <script type="application/json" data-plotly="ID"> holds fig.to_json() for the element ID.
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function render(root) {
    (root || document).querySelectorAll("script[data-plotly]").forEach(function (script) {
      var target = document.getElementById(script.dataset.plotly);
      if (!target || !window.Plotly) { return; }
      var figure = JSON.parse(script.textContent);
      window.Plotly.react(target, figure.data, figure.layout, CONFIG).then(function () {
        target.dataset.rendered = "1";
      });
    });
  }

  window.ConsoleCharts = { render: render };
  render(document);
})();
