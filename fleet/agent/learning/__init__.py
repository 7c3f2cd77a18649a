"""What the device learns about its own samples-to-target while it trains: its learning curve
(`learning_curve`), a belief over samples-to-target per batch size with the shipped vector as prior
(`efficiency_belief`), the one online learner every runner uses (`efficiency_learner`), and the
gradient noise scale of its own data (`noise_scale`). Plain numbers in, a corrected efficiency out.
"""
