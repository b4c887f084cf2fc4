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
      // Responsive plots fill their element: give it the figure's height, or a resize
      // shrinks the plot to the element's minimum height.
      if (figure.layout && figure.layout.height) { target.style.height = figure.layout.height + "px"; }
      window.Plotly.react(target, figure.data, figure.layout, CONFIG).then(function () {
        target.dataset.rendered = "1";
      });
    });
  }

  window.ConsoleCharts = { render: render };
  render(document);
})();
