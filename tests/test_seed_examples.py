"""The pytest examples of the design article (seed 000), copied with only import paths changed."""
import pytest
from deepeval.test_case import LLMTestCase, ToolCall
from deepeval.metrics import ToolCorrectnessMetric
from otel_agent_eval import ToolEfficiencyMetric
from seed_tool_config import CALCULATOR_TOOLS


# Example 1: Cost-Aware Calculator Selection

@pytest.mark.parametrize("calculation,expected_result", [
    ("What is 25 + 37?", "62"),
    ("Calculate 15% of 240", "36"),
])
def test_basic_math_uses_efficient_tool(calculation, expected_result):
    test_case = LLMTestCase(
        input=calculation,
        actual_output=expected_result,
        expected_output=expected_result,
        tools_called=[ToolCall(name="basic_calculator")],
        expected_tools=[ToolCall(name="basic_calculator")],
        additional_metadata={"tools_used": ["basic_calculator"]}
    )
    
    correctness = ToolCorrectnessMetric()
    
    efficiency = ToolEfficiencyMetric(
        tool_costs=CALCULATOR_TOOLS["costs"],
        tool_latencies=CALCULATOR_TOOLS["latencies"],
        optimal_tool="basic_calculator",
        threshold=0.9,
        cost_weight=0.8,  # Prioritize cost
        latency_weight=0.2
    )
    
    correctness.measure(test_case)
    efficiency.measure(test_case)
    
    assert correctness.is_successful()
    assert efficiency.is_successful()


# Example 2: Latency Optimization for User-Facing Features

def test_faq_search_prioritizes_speed():
    test_case = LLMTestCase(
        input="What is your return policy?",
        actual_output="Our return policy allows 30-day returns...",
        expected_output="Our return policy allows 30-day returns...",
        tools_called=[ToolCall(name="local_index")],
        expected_tools=[ToolCall(name="local_index")],
        additional_metadata={"tools_used": ["local_index"]}
    )
    
    efficiency = ToolEfficiencyMetric(
        tool_costs={"local_index": 0.0, "web_search": 0.003},
        tool_latencies={"local_index": 30, "web_search": 400},
        optimal_tool="local_index",
        threshold=0.8,
        cost_weight=0.2,  # Cost matters less
        latency_weight=0.8  # Speed is critical
    )
    
    efficiency.measure(test_case)
    assert efficiency.is_successful()


def test_faq_detects_slow_tool():
    test_case = LLMTestCase(
        input="What are your business hours?",
        actual_output="We're open Monday-Friday 9am-5pm EST",
        tools_called=[ToolCall(name="web_search")],  # Too slow!
        expected_tools=[ToolCall(name="local_index")],
        additional_metadata={"tools_used": ["web_search"]}
    )
    
    efficiency = ToolEfficiencyMetric(
        tool_costs={"local_index": 0.0, "web_search": 0.003},
        tool_latencies={"local_index": 30, "web_search": 400},
        optimal_tool="local_index",
        threshold=0.8,
        cost_weight=0.2,
        latency_weight=0.8
    )
    
    efficiency.measure(test_case)
    assert not efficiency.is_successful()  # Should fail
    
    # Output: Efficiency score: 0.08
    # Reason: Suboptimal tool 'web_search' selected. 
    #         Cost efficiency: 0.00, Latency efficiency: 0.08


# Example 3: Context-Appropriate Tool Complexity

from otel_agent_eval import ContextualComplexityMetric

def test_simple_filtering_avoids_overengineering():
    """Simple tasks shouldn't trigger ML pipelines"""
    test_case = LLMTestCase(
        input="Show me orders from last week",
        actual_output="Here are 47 orders from last week...",
        tools_called=[ToolCall(name="simple_filter")],
        expected_tools=[ToolCall(name="simple_filter")],
        additional_metadata={"tools_used": ["simple_filter"]}
    )
    
    efficiency = ContextualComplexityMetric(
        task_complexity="simple",  # Expected complexity
        tool_costs={"simple_filter": 0.0, "ml_pipeline": 0.10},
        tool_latencies={"simple_filter": 100, "ml_pipeline": 8000},
        optimal_tool="simple_filter",
        threshold=0.85
    )
    
    efficiency.measure(test_case)
    assert efficiency.is_successful()


def test_underengineered_solution_detected():
    """Complex tasks need appropriate tools"""
    test_case = LLMTestCase(
        input="Predict next quarter's revenue based on trends",
        actual_output="Estimated revenue: $1.2M",
        tools_called=[ToolCall(name="simple_filter")],  # Too simple!
        expected_tools=[ToolCall(name="ml_pipeline")],
        additional_metadata={"tools_used": ["simple_filter"]}
    )
    
    efficiency = ContextualComplexityMetric(
        task_complexity="advanced",
        tool_costs={"simple_filter": 0.0, "ml_pipeline": 0.10},
        tool_latencies={"simple_filter": 100, "ml_pipeline": 8000},
        optimal_tool="ml_pipeline",
        threshold=0.8
    )
    
    efficiency.measure(test_case)
    assert not efficiency.is_successful()  # Should fail
    
    # Output includes: "Complexity mismatch: advanced task using simple tool"


# Test Case Structure Summary / "Combining with ToolCorrectnessMetric"

def test_combined_correctness_and_efficiency():
    test_case = LLMTestCase(
        input="What is 15% of 240?",
        actual_output="36",
        expected_output="36",
        tools_called=[ToolCall(name="basic_calculator")],
        expected_tools=[ToolCall(name="basic_calculator")],
        additional_metadata={"tools_used": ["basic_calculator"]}
    )
    # Initialize metrics
    correctness = ToolCorrectnessMetric()

    efficiency = ToolEfficiencyMetric(
        tool_costs={"basic_calculator": 0.0, "code_interpreter": 0.002},
        tool_latencies={"basic_calculator": 50, "code_interpreter": 200},
        optimal_tool="basic_calculator",
        threshold=0.9,
        cost_weight=0.8,
        latency_weight=0.2
    )

    # Measure both
    correctness.measure(test_case)
    efficiency.measure(test_case)

    # Assert both pass
    assert correctness.is_successful()
    assert efficiency.is_successful()
